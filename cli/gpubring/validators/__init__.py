"""Cross-field inventory checks, one module per concern (for example kubelet_topology.py).

Every module in this package is imported before an inventory is validated. A module registers its
checks with the decorator `gpubring.specs.register_validator`; each check takes the loaded
`gpubring.inventory.Inventory` and returns a list of `gpubring.specs.Problem` (file relative to the
inventory folder, key path, what was expected). `Inventory.origin(host, key)` names the file that set
a host's variable.
"""
