"""TRL: GRPO on legato desktops through TRL 1.16's ``environment_factory``, screenshots in the training batch.

    # On a CPU, no download: a tiny random Qwen3-VL, the fake desktops, 2 optimizer steps
    python examples/trl_environment.py --model tiny --steps 2

    # A real VLM on real desktops (a GPU; TRL's vLLM with use_vllm=True works too, colocated or served)
    python examples/trl_environment.py --model Qwen/Qwen3-VL-2B-Instruct --backend local --desktops 8 \
        --batch-size 8 --num-generations 4 --steps 100

TRL generates with the model it trains. Each completion drives one legato desktop through tool calls
(``legato_rl.integrations.trl.DesktopTools``: click, type_text, press, ..., done, fail); every tool runs its
action on the desktop, in the vector env's worker process, and returns the new screenshot as an image,
which TRL keeps in the completion with its pixels: the training forward pass gets ``pixel_values`` for
the first screenshot and for every screenshot a tool returned. The reward is legato's grade of the desktop.

``--model tiny`` builds a random model (``tiny_qwen3_vl.py``) that would never write a valid tool call, so
this script steers its sampling (a logits processor, :class:`ScriptedSampling`) to the fake desktop's known
solution in every other completion and to giving up in the others: each GRPO group then has a reward
signal. Only the choice of tokens is steered; the forward passes, the loss and the update are TRL's own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from legato_gym import DesktopConfig, Task, resolve_backend
from legato_gym.backends.fake import FakeStep, fake_solution
from legato_rl.integrations.trl import DesktopEnvironments, task_dataset

__all__ = ["PixelProbe", "ScriptedSampling", "build_trainer", "main"]

#: The fake desktops' screen: a 320x240 screenshot is 70 image tokens for Qwen3-VL.
_SCREEN = (320, 240)


@dataclass
class PixelProbe:
    """Counts the training forward passes (gradients on) that carried screenshots' pixels.

    Attributes:
        image_token_id: the model's image placeholder token.
        passes: training forward passes seen.
        with_pixels: those that had ``pixel_values``.
        images: screenshots in those passes (rows of ``image_grid_thw``).
        image_tokens: image placeholder tokens in their ``input_ids``.
        grid: each of those images' ``(t, h, w)`` patch grid.
    """

    image_token_id: int
    passes: int = 0
    with_pixels: int = 0
    images: int = 0
    image_tokens: int = 0
    grid: list[list[int]] = field(default_factory=list)

    def attach(self, model: Any) -> None:
        """Watch ``model``'s forward passes."""
        model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        import torch

        if not (torch.is_grad_enabled() and module.training):
            return
        self.passes += 1
        pixels = kwargs.get("pixel_values")
        if pixels is None:
            return
        self.with_pixels += 1
        grid = kwargs["image_grid_thw"]
        self.images += int(grid.shape[0])
        self.grid.extend(grid.tolist())
        self.image_tokens += int((kwargs["input_ids"] == self.image_token_id).sum())


class ScriptedSampling:
    """Steers a random model's sampling to scripted tool calls (``--model tiny`` only).

    The reply for each completion is read off what the sequence holds so far: the instruction that
    ``reset`` put in the prompt names the task; the number of tool responses says which step is next. In
    the first turn, even rows of the batch (the first completion of each GRPO group) play the fake
    desktop's solution and odd rows give up (``fail``); after the last call the reply is plain text, which
    ends TRL's tool loop.
    """

    def __init__(self, tasks: Sequence[Task], screen: tuple[int, int], tokenizer: Any) -> None:
        self.tasks = {t.instruction: t for t in tasks}
        self.screen = screen
        self.tokenizer = tokenizer
        self.eos = int(tokenizer.convert_tokens_to_ids("<|im_end|>"))

    def attach(self, model: Any) -> None:
        """Make ``model.generate`` use this script (TRL calls ``generate`` on the unwrapped model)."""
        generate = model.generate

        def steered(*args: Any, **kwargs: Any) -> Any:
            from transformers import LogitsProcessorList

            prompt_length = int(kwargs["input_ids"].shape[1])
            kwargs["logits_processor"] = LogitsProcessorList([self._processor(prompt_length)])
            return generate(*args, **kwargs)

        model.generate = steered

    def reply(self, sequence: str, row: int) -> str:
        """The scripted reply to ``sequence`` (the decoded prompt so far) for batch row ``row``."""
        task = self._task(sequence)
        done = sequence.count("<tool_response>")
        turns = sequence.split("<|im_start|>assistant\n")
        gave_up = len(turns) > 2 and '"name": "fail"' in turns[1]
        if done == 0 and row % 2 == 1:
            return _call("fail", {})
        solution = fake_solution(task, self.screen)
        if gave_up or done >= len(solution):
            return "The task is finished."
        return _step_call(solution[done], self.screen)

    def _task(self, sequence: str) -> Task:
        for instruction, task in self.tasks.items():
            if f"Instruction: {instruction}" in sequence:
                return task
        raise ValueError("the prompt names none of the tasks")

    def _processor(self, prompt_length: int) -> Callable[[Any, Any], Any]:
        import torch

        targets: dict[int, list[int]] = {}

        def process(input_ids: Any, scores: Any) -> Any:
            for row in range(input_ids.shape[0]):
                if row not in targets:
                    text = self.tokenizer.decode(input_ids[row, :prompt_length])
                    ids = self.tokenizer.encode(self.reply(text, row), add_special_tokens=False)
                    targets[row] = [*ids, self.eos]
                target = targets[row]
                position = input_ids.shape[1] - prompt_length
                token = target[position] if position < len(target) else self.eos
                scores[row] = -torch.inf
                scores[row, token] = 0.0
            return scores

        return process


def _call(name: str, arguments: Mapping[str, Any]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': dict(arguments)})}\n</tool_call>"


def _step_call(step: FakeStep, screen: tuple[int, int]) -> str:
    if step.kind == "click":
        x, y = step.relative(screen)  # the 0..999 grid of the tools (legato_rl.integrations.trl.GRID)
        return _call("click", {"x": x, "y": y})
    if step.kind == "type":
        return _call("type_text", {"text": step.text})
    if step.kind == "key":
        return _call("press" if len(step.keys) == 1 else "hotkey", {"keys": list(step.keys)})
    return _call("done" if step.kind == "done" else "fail", {})


def _merge(processor: Any) -> int:
    return int(getattr(processor.image_processor, "merge_size", 2))


def build_trainer(
    model: Any,
    processor: Any,
    environments: DesktopEnvironments,
    tasks: Sequence[Task],
    *,
    output_dir: str,
    steps: int,
    batch_size: int = 2,
    num_generations: int = 2,
    learning_rate: float = 1e-5,
    **config: Any,
) -> Any:
    """A GRPOTrainer on ``environments``; ``config`` overrides GRPOConfig fields."""
    import torch
    from trl import GRPOConfig, GRPOTrainer  # type: ignore[attr-defined]

    on_cpu = not torch.cuda.is_available()
    config.setdefault("use_cpu", on_cpu)
    config.setdefault("bf16", not on_cpu)
    config.setdefault("max_completion_length", 4096)
    # one tool call per desktop action, and one more for the reply after the episode ended
    config.setdefault("max_tool_calling_iterations", environments.env.max_steps + 1)
    args = GRPOConfig(
        output_dir=output_dir,
        max_steps=steps,
        num_generations=num_generations,
        per_device_train_batch_size=batch_size,
        learning_rate=learning_rate,
        beta=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        **config,
    )
    return GRPOTrainer(
        model=model,
        processing_class=processor,
        args=args,
        train_dataset=task_dataset(tasks, prompt=""),
        # TRL 1.16 takes a reset() that returns content blocks (its _SupportsReset protocol only says str | None)
        environment_factory=environments,  # type: ignore[arg-type]
    )


@contextlib.contextmanager
def _model(name: str) -> Iterator[tuple[Any, Any]]:
    if name != "tiny":
        from transformers import AutoModelForImageTextToText, AutoProcessor

        yield AutoModelForImageTextToText.from_pretrained(name), AutoProcessor.from_pretrained(name)  # type: ignore[no-untyped-call]
        return
    from tiny_qwen3_vl import build_tiny_qwen3_vl, load_processor
    from transformers import Qwen3VLForConditionalGeneration

    with tempfile.TemporaryDirectory() as folder:
        path = build_tiny_qwen3_vl(folder)
        yield Qwen3VLForConditionalGeneration.from_pretrained(path), load_processor(path)


def main(argv: Sequence[str] | None = None) -> Mapping[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a VLM path or hub id; 'tiny' builds a tiny random Qwen3-VL")
    parser.add_argument("--backend", default="fake")
    parser.add_argument("--tasks", nargs="*", help="task ids to train on (default: the backend's suite)")
    parser.add_argument("--desktops", type=int, help="desktops (default: --batch-size)")
    parser.add_argument("--max-steps", type=int, default=8, help="actions per episode")
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=2, help="completions per optimizer step")
    parser.add_argument("--num-generations", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args(argv)

    if args.model == "tiny" and args.backend != "fake":
        parser.error("--model tiny is steered to the fake desktops' solutions: use --backend fake")
    # small fake screens keep the tiny model's sequences short; real desktops keep their own size
    desktop = DesktopConfig(screen=_SCREEN) if args.backend == "fake" else DesktopConfig()
    tasks = resolve_backend(args.backend).default_tasks(desktop)
    if args.tasks:
        tasks = [t for t in tasks if t.task_id in set(args.tasks)]
        if len(tasks) != len(set(args.tasks)):
            parser.error(f"--tasks: unknown ids among {args.tasks}")
    with contextlib.ExitStack() as stack:
        output_dir = args.output_dir or stack.enter_context(tempfile.TemporaryDirectory())
        model, processor = stack.enter_context(_model(args.model))
        environments = stack.enter_context(
            DesktopEnvironments(
                tasks,
                backend=args.backend,
                desktops=args.desktops or args.batch_size,
                max_steps=args.max_steps,
                desktop=desktop,
            )
        )
        if args.model == "tiny":
            ScriptedSampling(tasks, _SCREEN, processor.tokenizer).attach(model)
        probe = PixelProbe(int(model.config.image_token_id))
        probe.attach(model)
        tiny = {"gradient_checkpointing": False} if args.model == "tiny" else {}  # nothing to save on 0.15 M
        trainer = build_trainer(
            model, processor, environments, tasks, output_dir=output_dir, steps=args.steps,
            batch_size=args.batch_size, num_generations=args.num_generations, learning_rate=args.learning_rate,
            **tiny,
        )  # fmt: skip
        vision = {n: p.detach().clone() for n, p in model.named_parameters() if ".visual." in f".{n}"}
        trainer.train()
        moved = [n for n, p in model.named_parameters() if n in vision and not bool((p.detach() == vision[n]).all())]
        graded = [e.reward for e in environments.episodes if e.reward is not None]
        summary = {
            "optimizer_steps": trainer.state.global_step,
            "episodes": len(environments.episodes),
            "reward_mean": sum(graded) / max(1, len(graded)),
            "screenshots_returned": sum(e.screenshots for e in environments.episodes),
            "training_passes": probe.passes,
            "training_passes_with_pixels": probe.with_pixels,
            "training_images": probe.images,
            "training_image_tokens": probe.image_tokens,
            "training_image_features": sum(t * h * w for t, h, w in probe.grid) // _merge(processor) ** 2,
            # gradients reach the vision tower only through pixel_values: the screenshots were trained on
            "vision_parameters_moved": len(moved),
        }
        print(summary)
        return summary


if __name__ == "__main__":
    main()
