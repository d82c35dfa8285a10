"""Applications built on gridcomm: the ESCAPE dwarfs, as tests and benchmarks of its exchanges."""
