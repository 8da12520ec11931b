"""The tests' name for agentd's fake model server (agentd/services/demomodel, which `agentd demo-model` serves)."""

from agentd.services.demomodel import *  # noqa: F403 (the same names, under the tests' old import path)
from agentd.services.demomodel import __all__ as __all__
