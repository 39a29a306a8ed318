"""The scenario language: models, loader, problems, schema and built-in presets.

    scenario = load_scenario("scenarios/default.yaml")   # raises ScenarioError with every problem
    checked = check_file("x.yaml")                       # never raises: .scenario and .problems
"""

from pathlib import Path

from .document import API_VERSION, Scenario
from .loader import Checked, check_file, check_text, load_scenario
from .problems import Problem, ScenarioError, render_json, render_text
from .schema import scenario_schema, schema_text

DEFAULT_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "default.yaml"
"""The built-in scenario `aisim run`, `serve` and `tui` use when given none."""

__all__ = [
    "API_VERSION",
    "DEFAULT_SCENARIO",
    "Checked",
    "Problem",
    "Scenario",
    "ScenarioError",
    "check_file",
    "check_text",
    "load_scenario",
    "render_json",
    "render_text",
    "scenario_schema",
    "schema_text",
]
