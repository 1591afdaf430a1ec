"""gpubring: bring up GPU Kubernetes clusters on bare metal with Ansible."""

__version__ = "0.1.0"
