from chaos.nemesis.base import CompositeNemesis, FaultSpec, Nemesis, NemesisError
from chaos.nemesis.process import ProcessNemesis, WorkerStates
from chaos.nemesis.provider import ProviderNemesis
from chaos.nemesis.runner import run_schedule
from chaos.nemesis.schedule import periodic_schedule

__all__ = [
    "CompositeNemesis",
    "FaultSpec",
    "Nemesis",
    "NemesisError",
    "ProcessNemesis",
    "WorkerStates",
    "ProviderNemesis",
    "periodic_schedule",
    "run_schedule",
]
