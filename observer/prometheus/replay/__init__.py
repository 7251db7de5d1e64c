"""Range replay from raw samples, with the instant cycle's rules."""
