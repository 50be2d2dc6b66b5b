"""failure_signatures.yaml is validated by pydantic models (tools/slurm/failures.py: SignatureEntry,
SignatureFile), as the lever catalogs are: a bad entry is one line naming it and its field; an
unknown key (a misspelt ``patern``) is refused instead of silently matching nothing."""

from __future__ import annotations

import pytest

from ai4s_graph.tools.errors import InputError
from ai4s_graph.tools.slurm import failures as F

OK = {"name": "a", "class": "infra", "kind": "fabric", "pattern": "x", "source": "s"}


@pytest.mark.parametrize("entry,msg", [
    ({**OK, "patern": "y"}, "signature a patern: Extra inputs are not permitted"),
    ({**OK, "pattern": "("}, "signature a pattern: bad pattern: missing ), unterminated subpattern"),
    ({k: v for k, v in OK.items() if k != "name"}, "signature #0 name: has no name"),
    ({**OK, "class": "weather"}, "signature a class: Input should be 'infra' or 'lever'"),
    ({**OK, "exit_status": "forty-two"}, "signature a exit_status: Input should be a valid integer"),
])
def test_bad_entry_is_one_line_naming_it(entry, msg):
    with pytest.raises(InputError) as e:
        F.parse_signatures({"signatures": [entry]}, "sigs.yaml")
    assert str(e.value).startswith("sigs.yaml: " + msg) and "\n" not in str(e.value)


def test_duplicate_names_and_bundled_file():
    with pytest.raises(InputError, match="signature a appears twice"):
        F.parse_signatures({"signatures": [OK, OK]})
    sigs = F.load_signatures()
    assert len(sigs) == len({s.name for s in sigs}) == 17
    assert all(s.source for s in sigs) and any(s.pattern is not None and s.pattern.search(s.example) for s in sigs)
