"""Training: a small, deterministic, resumable loop shared by the transmitter and the diffusion models."""
