"""Decision records the engines return and the decision events carry: placement and quota.

Typed, frozen msgspec values with JSON builtins only (no floats), so a decision read back from the log compares
equal, field by field, to the one replay re-derives.
"""
