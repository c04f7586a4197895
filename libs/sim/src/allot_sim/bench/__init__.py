"""The benchmarks behind ``allot bench``: one module each, every one returning its figures as one mapping."""
