"""`check` knows litellm's providers without importing litellm: the list it keeps is litellm's own."""

from __future__ import annotations

import subprocess
import sys

from sembp_dsl.language.blocks.providers import LITELLM, OWN


def test_the_provider_list_is_litellms():
    import litellm  # the list's source; check itself never imports it

    listed = {getattr(p, "value", p) for p in litellm.provider_list} - OWN  # OWN joins it once registered
    assert set(LITELLM) == listed


def test_check_imports_no_litellm(tmp_path):
    path = tmp_path / "p.sbp"
    path.write_text('pipeline t\ninput q: text\nnode a: text {}\nq -> a\noutput a\nmodel { name = "opneai/x" }\n')
    code = (
        "import sys\nfrom sembp_dsl.cli import main\n"
        f"try:\n    main(['check', {str(path)!r}])\nexcept SystemExit:\n    pass\n"
        "assert 'litellm' not in sys.modules, 'check imported litellm'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "E128" in done.stdout + done.stderr and "did you mean 'openai'?" in done.stdout + done.stderr
