"""Model execution: the loaded artifact and its forward calls on one device or over
tensor-parallel ranks, and a step's batch preparation."""
