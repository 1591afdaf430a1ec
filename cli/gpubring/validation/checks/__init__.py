"""Cross-field inventory checks of roles, one module per concern (for example kubelet_topology.py).

Every module here is imported before an inventory is validated (gpubring.validation.crosshost.
registered()). A module registers its checks with the decorator
`gpubring.validation.crosshost.register_validator`; each check takes the loaded
`gpubring.model.Inventory` and returns a list of `gpubring.yamlfile.Problem` (file relative to the
inventory folder, key path, what was expected). `Inventory.origin(host, key)` names the file that set
a host's variable.
"""
