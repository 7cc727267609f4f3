"""Group-size controllers: choose G for the next step, observe the step's group lengths.
Pure Python (no torch), so other frameworks can drive them."""

from tailrl.control.base import CONTROLLERS, GroupController, build_controller
from tailrl.control.sagc import SAGCController
from tailrl.control.static import StaticController

__all__ = ["CONTROLLERS", "GroupController", "SAGCController", "StaticController", "build_controller"]
