"""Validation: one home per kind of rule. gpubring.inventory reads and merges, then calls these.

- specs: the argument specs (settings.yml, roles' meta/argument_specs.yml and defaults, the version
  rules' `when` keys) and the type checks of one key's value;
- rules: versions.yml's compatibility rules and the shape of gpubring_versions overrides;
- crosshost: the inventory's structure across hosts, and the registry of cross-field checks;
- checks/: the registered cross-field checks of roles, one module per concern.

Nothing here reads the inventory, prints or exits: every check returns Problems.
"""
