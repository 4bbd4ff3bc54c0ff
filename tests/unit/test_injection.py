"""Names cannot inject code into the exported files (issue 16).

A model name reaches the header comment of the Megatron shell script and of the torchtitan
files. Control characters are refused at the spec boundary (every declared text field), and
each exporter writes values in its language's own quoting: shlex for the shell script, repr
for Python, TOML and JSON encoders for the configs. Checked by running what a user would run:
bash sources the script (and must run nothing but the assignment), Python tokenizes its file
(the name appears only in comments and string literals), tomllib and json parse the configs.
"""
import io
import json
import subprocess
import tokenize
import tomllib

import pytest

from fitplan.cli import main

PAYLOADS = ['x"; touch PWNED; echo "', "$(touch PWNED)", "`touch PWNED`", "x'; touch PWNED; '", "x\\n touch PWNED",
            "x # touch PWNED"]


def export(tmp_path, name: str, fmt: str, *extra: str) -> tuple[int, str, str]:
    """The export of a one-layout plan (FSDP over 8 GPUs, which every format can write) of a model named `name`."""
    spec = tmp_path / "spec.toml"
    spec.write_text("[model]\nname = " + json.dumps(name) + "\nnum_layers = 4\nhidden_size = 256\nnum_heads = 4\n"
                    "num_kv_heads = 4\nffn_hidden_size = 1024\nvocab_size = 1000\nmax_seq_len = 512\n")
    out, err = io.StringIO(), io.StringIO()
    code = main(["export", "--spec", str(spec), "--seq-len", "512", "--gpus", "8", "--global-batch", "64",
                 "--dp", "8", "--zero", "3", "--format", fmt, *extra], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("name", PAYLOADS)
def test_the_megatron_script_sources_without_running_the_name(tmp_path, name):
    code, text, err = export(tmp_path, name, "megatron")
    assert code == 0, err
    script = tmp_path / "args.sh"
    script.write_text(text)
    proc = subprocess.run(["bash", "-c", f'source {script} && printf "%s\\n" "${{FITPLAN_ARGS[@]}}"'],
                          cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "PWNED").exists()
    assert "--tensor-model-parallel-size" in proc.stdout     # the arguments themselves arrive intact


@pytest.mark.parametrize("name", PAYLOADS)
def test_the_torchtitan_python_file_holds_the_name_only_in_comments_and_strings(tmp_path, name):
    code, text, err = export(tmp_path, name, "torchtitan-python")
    assert code == 0, err
    compile(text, "torchtitan_config.py", "exec")     # valid Python
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if "PWNED" in tok.string:
            assert tok.type in (tokenize.COMMENT, tokenize.STRING), tok


@pytest.mark.parametrize("name", PAYLOADS)
def test_the_configs_parse(tmp_path, name):
    code, text, _ = export(tmp_path, name, "torchtitan", "--torchtitan-version", "0.2")   # 0.2.x: the TOML
    assert code == 0 and tomllib.loads(text) is not None
    code, text, _ = export(tmp_path, name, "deepspeed")
    assert code in (0, 1)
    if code == 0:
        json.loads(text)


@pytest.mark.parametrize("name", ["x\ntouch PWNED", "x\rtouch", "a\x1bb", "tab\there"])
def test_a_name_with_a_control_character_is_refused_in_one_line(tmp_path, name):
    code, out, err = export(tmp_path, name, "megatron")
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "model.name must be printable text without line breaks" in err
