"""The client's filter values are the engine's."""

from wq.client.vocabulary import ADMISSIONS, PHASES
from wq.engine import models


def test_the_client_knows_the_engines_phases_and_admission_states() -> None:
    assert PHASES == models.PHASES
    assert set(ADMISSIONS) == {models.QUEUED, models.ADMITTED, models.IDLE, models.DONE}
