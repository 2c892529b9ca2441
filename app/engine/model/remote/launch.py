"""Serve the local model's own checkpoint with vLLM: ``make vllm`` and the remote-engine tests.

``python -m app.engine.model.remote.launch --vllm .venv-vllm/bin/vllm`` converts the embedded model
once if needed (as ``make run`` does) and replaces itself with ``vllm serve`` on that directory.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence

__all__ = ["DEFAULT_SERVED_NAME", "main", "vllm_command", "vllm_environment"]

#: The name the default model is served under (the ``model`` of its remote-engine entry).
DEFAULT_SERVED_NAME = "smollm2-135m-instruct"


def vllm_command(
    *,
    vllm: str,
    model_dir: str,
    host: str,
    port: int,
    served_name: str = DEFAULT_SERVED_NAME,
    max_model_len: int = 2048,
    eager: bool = True,
) -> list[str]:
    """The ``vllm serve`` command line the remote engine expects.

    ``--max-logprobs -1`` lets one request return the whole distribution (exact figures);
    prefix caching makes each step's request cost one token of prefill; float32 makes the
    logprobs comparable with the local model's. ``eager`` skips torch.compile, which takes
    minutes on a small CPU and is not faster for a 135M model.
    """
    command = [vllm, "serve", model_dir, "--host", host, "--port", str(port)]
    command += ["--served-model-name", served_name, "--dtype", "float32"]
    command += ["--max-model-len", str(max_model_len), "--max-logprobs", "-1"]
    command += ["--enable-prefix-caching"]
    if eager:
        command.append("--enforce-eager")
    return command


def vllm_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` plus a 1 GiB KV cache for the CPU build, unless ``base`` sets one."""
    environment = dict(base)
    environment.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return environment


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and ``exec`` vLLM on the configured model's checkpoint."""
    from app.engine.model.loading import checkpoint_source
    from app.settings import Settings

    parser = argparse.ArgumentParser(
        prog="python -m app.engine.model.remote.launch", description=__doc__
    )
    parser.add_argument("--vllm", default="vllm", help="the vllm executable")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--served-name", default=DEFAULT_SERVED_NAME)
    parser.add_argument("--compile", action="store_true", help="let vLLM run torch.compile")
    args = parser.parse_args(argv)
    command = vllm_command(
        vllm=args.vllm,
        model_dir=checkpoint_source(Settings()),
        host=args.host,
        port=args.port,
        served_name=args.served_name,
        eager=not args.compile,
    )
    print(" ".join(command), flush=True)
    os.execvpe(command[0], command, vllm_environment(os.environ))


if __name__ == "__main__":
    main()
