"""Training samples out of a run: one row per policy step of every completed rollout (``legato rl export``).

Each row holds exactly these fields, in this order (JSONL value; Parquet type):

* ``rollout_id``, ``task_id``, ``group_id``: strings (``string`` not null); the identity a trainer joins on.
* ``step_index``: the step's 0-based index in its rollout (``int32`` not null).
* ``status``: the rollout's status, ``ok`` or ``truncated`` (``string`` not null).
* ``messages``: the prompt as sent, a list of chat messages (``string`` not null: the same list as JSON text).
* ``prompt_token_ids``: the prompt's token ids exactly as the server returned them (vLLM
  ``prompt_token_ids``, SGLang ``choices[0].prompt_token_ids``), or null (``list<int32>``).
* ``prompt_continues``: whether the prompt continues the previous step's prompt and response token for
  token (:class:`~legato_rl.store.PromptIds`), or null without prompt ids (``bool``).
* ``response_text``: the reply's content (``string`` not null).
* ``response_reasoning``: the reasoning the server split off, or null (``string``).
* ``response_token_ids``: the reply's token ids, or null when the server gave none (``list<int32>``).
* ``response_logprobs``: one logprob per token, or null (``list<float32>``: vLLM computes them in float32).
* ``response_tokens``: the tokens as text, only when there are no token ids, else null (``list<string>``).
* ``finish_reason``: ``stop``, ``length``, ... as the server said, or null (``string``).
* ``reward``: the rollout's reward (``double`` not null).
* ``advantage``: the rollout's group advantage (``double`` not null).
* ``policy_version``: the version loaded when this step's call was made (the step's ``model.policy_version``;
  for records without it, the version stamped on the rollout, ``--version``), or null (``string``).
* ``weight_version``: the weight version the server reported for this reply, or null (``string``).
* ``grader``: the grader that scored the rollout's reward (``osworld``, ``local``, ``fake``, ...), or null
  for records written before records named it (``string``).
* ``reset_kind``: how the rollout's desktop was reset for it, in its backend's word (``fast``, ``revert``,
  ``ahead``, ...), or null when the backend does not say or the record predates it (``string``).

With ``image_column`` (Parquet only) a last column ``images`` holds the step's screenshots in the order
``messages`` references them, as a Hugging Face ``datasets`` ``List(Image())`` column
(``list<struct<bytes: binary, path: string>>``, ``path`` being ``images/<sha>.png``); the file's
``huggingface`` metadata says so, so ``datasets.load_dataset("parquet", ...)`` decodes them as PIL images.
Every row carries its whole prompt's screenshots: that file grows with the steps squared, as the prompts do.

Token ids are ``int32`` and logprobs ``float32`` in Parquet (JSONL keeps the recorded numbers as they are); an
id outside the ``int32`` range fails the export with :class:`~legato_rl.store.RecordError`.

``messages`` is the prompt exactly as it was sent (:func:`legato_rl.store.load_request`), each image as its
``legato-image://<sha>`` reference (the PNG is ``RUN/images/<sha>.png``) or, with ``inline_images``, as its
original ``data:image/png;base64,...`` URL. In Parquet it is a JSON string column: chat messages mix string
and list contents and carry optional keys, so no struct type holds them without adding nulls or changing
them; a JSON string is read back by pyarrow and by Hugging Face ``datasets`` byte for byte
(``json.loads(row["messages"])``).

Rows come from the ``ok`` and ``truncated`` records only (``surplus``, ``cancelled``, ``skipped``,
``retried`` and ``error`` records are counted in :attr:`ExportStats.excluded`). ``advantage`` is the GRPO
group advantage (:func:`legato_rl.advantages.group_advantages`): ``(reward - mean) / std`` over the
completed attempts of the rollout's group, with the **population** standard deviation (ddof 0), and 0 for
every member when all their rewards are equal. All steps of a rollout share its reward and advantage.

The export streams: a first pass reads only each record's outcome (for the advantages: one float per
completed rollout is kept), a second pass writes one row per step; Parquet rows are written in row groups
of bounded size. Memory holds one row (JSONL) or one row group (Parquet) at a time, plus an id and a float
per completed rollout: it does not grow with the rollouts' prompts, screenshots or tokens. The output is written to a
temporary file beside the target and renamed over it when complete, so a failed export never leaves a
half-written file in place of a good one.

The package, one concern a module (its public names are importable from ``legato_rl.export``)::

    steps.py    export_steps and ExportStats: the two passes over a run, and what they wrote
    rows.py     one row per step: EXPORT_FIELDS, IMAGES_FIELD, the advantages' first pass, the images
    writers.py  the JSONL and Parquet writers: FORMATS, parquet_schema, EXPORT_SCHEMA, DATASETS_EXTRA
    files.py    the output file: a locked temporary file beside the target, renamed over it when complete
"""

from legato_rl.export.rows import EXPORT_FIELDS, IMAGES_FIELD
from legato_rl.export.steps import ExportStats, export_steps
from legato_rl.export.writers import DATASETS_EXTRA, EXPORT_SCHEMA, FORMATS, parquet_schema

__all__ = [
    "DATASETS_EXTRA",
    "EXPORT_FIELDS",
    "EXPORT_SCHEMA",
    "FORMATS",
    "IMAGES_FIELD",
    "ExportStats",
    "export_steps",
    "parquet_schema",
]
