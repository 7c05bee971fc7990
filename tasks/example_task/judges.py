"""Custom judges of the example task."""

from chalk_client.judges import Judge, register_judge
from chalk_client.scoring import Scoring
from chalk_client.transcript import Transcript


@register_judge("final_message_contains")
class FinalMessageJudge(Judge):
    """Passes when the student's last assistant message contains ``expected``."""

    def __init__(self, expected: str) -> None:
        self.expected = expected

    def evaluate(self, transcript: Transcript) -> Scoring:
        replies = [m for m in transcript.messages if m.role == "assistant" and m.text_parts()]
        last = "\n\n".join(replies[-1].text_parts()) if replies else ""
        passed = self.expected in last
        return Scoring(score=float(passed), metadata={"last_message": last}, continue_task=passed)
