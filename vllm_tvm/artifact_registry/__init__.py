"""Prebuilt artifacts: a signed registry of compiled models, and pulls verified before use."""
