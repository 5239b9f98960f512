"""What a deployment of brainhands is made of: the service table (``services``), each
service (``service``) and its environment variables (``env``). ``bh up``, the compose
file and the Kubernetes manifests are its outputs."""

from bh.deploy.env import SECRETS_DIR, Source, Variable
from bh.deploy.service import Kind, Port, Probe, Service
from bh.deploy.services import SERVICES, service

__all__ = [
    "SECRETS_DIR",
    "SERVICES",
    "Kind",
    "Port",
    "Probe",
    "Service",
    "Source",
    "Variable",
    "service",
]
