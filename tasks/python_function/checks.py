"""Custom judges of the python_function task."""

import ast

from chalk_client.judges import Judge, register_judge
from chalk_client.scoring import Scoring
from chalk_client.transcript import Transcript


@register_judge("defines_function")
class DefinesFunction(Judge):
    """Passes when the first saved file parses as Python and defines function ``name``.

    The file is parsed, never run: this judge runs inside the worker.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def evaluate(self, transcript: Transcript) -> Scoring:
        path = self.saved_submissions[0] if self.saved_submissions else None
        if path is None or not path.is_file():
            return Scoring(score=0.0, metadata={"missing": "no solution file"}, continue_task=False)
        try:
            tree = ast.parse(path.read_bytes())
        except (SyntaxError, ValueError) as exc:
            return Scoring(score=0.0, metadata={"syntax_error": str(exc)}, continue_task=False)
        names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        passed = self.name in names
        found = ", ".join(sorted(names)) or "none"
        return Scoring(score=float(passed), metadata={"functions": found}, continue_task=passed)
