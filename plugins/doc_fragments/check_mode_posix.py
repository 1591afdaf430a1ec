# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""The attributes the collection's modules share: full check mode, no diff, POSIX hosts."""

from __future__ import annotations


class ModuleDocFragment:
    # With ansible.builtin.action_common_attributes first (it describes each attribute).
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
"""
