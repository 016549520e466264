"""The transmitter: an encoder from 3D assets to latents, and the latent -> NeRSTF weights projection."""
