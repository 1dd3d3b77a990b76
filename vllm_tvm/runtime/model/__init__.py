"""Model execution: the TVM runtime, the loaded artifact and its forward calls, and the
logits it leaves on the device."""
