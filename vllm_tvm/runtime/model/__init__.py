"""Model execution: the runner interface and its one-device and tensor-parallel
implementations, the loaded artifact's forward calls, and a step's batch preparation."""
