"""The scheduler offline: the seven services' decision code over an in-memory log (the simulator), scenario files
and cluster traces run through it, the benchmarks behind ``allot bench``, and the in-memory trials of
``allot what-if`` over the deciders folded from the live log (:mod:`allot_sim.whatif`)."""
