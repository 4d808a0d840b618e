"""What every verb and target writes for a sample of the committed models is what it wrote when
tests/project/output_hashes.txt was recorded: a reorganisation of the code changes none of it.
A change meant to change an output records the sample again (tests/project/output_hashes.py says
how); the differing lines then show in the commit."""

from __future__ import annotations

from pathlib import Path

from tests.project import output_hashes

RECORDED = Path(__file__).with_name("output_hashes.txt")


def test_the_sample_writes_what_was_recorded():
    recorded = RECORDED.read_text().splitlines()
    differ = output_hashes.differing_lines(recorded, list(output_hashes.output_lines(sample=True)))
    assert not differ, (
        "what the verbs write changed (- recorded, + now); if meant, record it again with "
        "`python tests/project/output_hashes.py --sample > tests/project/output_hashes.txt`:\n"
        + "\n".join(differ[:40]))
