"""The scheduler offline: the seven services' decision code over an in-memory log (the simulator), scenario files
and cluster traces run through it, and the benchmarks behind ``allot bench``."""
