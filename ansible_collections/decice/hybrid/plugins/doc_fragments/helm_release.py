"""The options of the modules that install or remove one add-on's helm release
(decice.hybrid.addon_install, decice.hybrid.addon_remove); their argument spec is
``module_utils.release.OPTIONS``."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  name:
    description: The add-on, for messages (and, when installing, the sim adaptation reports).
    type: str
    required: true
  release:
    description: The helm release.
    type: str
    required: true
  namespace:
    description: The release's namespace.
    type: str
    required: true
  helm:
    description: The helm binary.
    type: path
    default: helm
requirements:
  - kubernetes
  - helm
"""
