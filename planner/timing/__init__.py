"""Step time: achieved FLOP efficiency, communication, pipeline bubble and time-to-train."""
