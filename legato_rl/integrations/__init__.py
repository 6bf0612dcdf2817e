"""Trainer integrations: legato's attempt loop (:mod:`legato_rl.rollout`) as trainers consume it.

* :mod:`legato_rl.integrations.sequence`: one episode as the multi-turn token sequence built from the
  policy server's own ids (prompt, replies and env tokens, mask, logprobs), cut only at turn boundaries;
  :func:`~legato_rl.integrations.sequence.play_sequences` plays a batch of them on a vector env.
* :mod:`legato_rl.integrations.verl`: verl 0.9.1: a policy that generates through verl's server manager
  (the replicas verl syncs weights into) and the fields of verl's ``AgentLoopOutput``.
* :mod:`legato_rl.integrations.trl`: TRL: ``environment_factory`` and ``rollout_func`` adapters.

Nothing here imports a trainer at import time: each module is duck-typed on what it uses and tested
against the trainer's real types.
"""

from legato_rl.integrations.sequence import Trajectory, episode_summary, play_sequence, play_sequences

__all__ = ["Trajectory", "episode_summary", "play_sequence", "play_sequences"]
