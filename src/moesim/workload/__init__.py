"""moesim.workload layer: parallel layouts, per-rank execution graphs, the MoE prefill generator and
Chakra ET read/write (docs/workload.md)."""

from moesim.workload.chakra import read_et, write_et
from moesim.workload.costs import comm_proxies, ep_alltoall_bytes, tp_allreduce_bytes
from moesim.workload.generator import GENERATORS, generate
from moesim.workload.graph import CollectiveType, Node, NodeKind, RankGraph, Workload
from moesim.workload.layout import ParallelLayout
from moesim.workload.options import STUDY_STRATEGIES, STUDY_TOKENS, WorkloadOptions
from moesim.workload.prompts import batch_tokens, prompt_attention_work, prompt_batch
from moesim.workload.summary import WorkloadSummary, summary

__all__ = [
    "GENERATORS",
    "STUDY_STRATEGIES",
    "STUDY_TOKENS",
    "CollectiveType",
    "Node",
    "NodeKind",
    "ParallelLayout",
    "RankGraph",
    "Workload",
    "WorkloadOptions",
    "WorkloadSummary",
    "batch_tokens",
    "comm_proxies",
    "ep_alltoall_bytes",
    "generate",
    "prompt_attention_work",
    "prompt_batch",
    "read_et",
    "summary",
    "tp_allreduce_bytes",
    "write_et",
]
