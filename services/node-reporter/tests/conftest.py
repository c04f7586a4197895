"""node-reporter tests. The machine trees under fixtures/ are data, linked as sysfs is (with cycles such as
``virtfn0`` -> VF -> ``physfn`` -> PF): test collection must not walk into them."""

collect_ignore = ["fixtures"]
