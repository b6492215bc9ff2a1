#include "step5attn/help.h"

#include <ostream>

namespace step5::tool {

namespace {

// Exit codes of every command, from cli.h.
constexpr const char* kExitCodes =
    "exit codes: 0 ok, 1 failure (a mismatch or an error), 2 bad usage,\n"
    "            3 cannot run here (no cuda backend built, no driver, no GPU of compute\n"
    "              capability 8.0 or newer)\n";

constexpr CommandHelp kHelp[] = {
    {"demo", "[--device cpu|cuda|auto] [--seed N] [--steps N] [--write-case FILE]",
     "run an embedded serving scenario on CSA and SWA layers, checked against the oracle",
     "An embedded serving run: 3 requests with prompts of 200..900 tokens prefilled in\n"
     "chunks of 160 tokens, then decode steps (k = 0) or MTP verify steps (k = 3) with\n"
     "random acceptance whose rejected drafts later steps rewrite, through four reduced\n"
     "Step5 layers (CSA and SWA, bf16 and fp8 KV). Every step is checked against the\n"
     "dense oracle; a table row per step shows the result.\n"
     "\n"
     "options:\n"
     "  --device cpu|cuda|auto  backend (default auto: cuda when it can run here, else cpu)\n"
     "  --seed N                scenario seed, >= 0 (default 7)\n"
     "  --steps N               decode/verify steps after the prompts, 0..10000 (default 6)\n"
     "  --write-case FILE       also save the first run (CSA, MTP) as a step5-case/1 file\n"
     "  -h, --help              this help\n"},
    {"replay", "CASE [--device cpu|cuda|auto] [--out FILE] [--check] [--max-memory MIB]",
     "replay a step5-case/1 file, optionally checking each step against the oracle",
     "Runs the steps of a SPEC 10 replay case on one backend and prints a row per step.\n"
     "\n"
     "arguments:\n"
     "  CASE                    a step5-case/1 safetensors file\n"
     "options:\n"
     "  --device cpu|cuda|auto  backend (default cpu; auto: cuda when it can run here)\n"
     "  --out FILE              write each step's outputs (SPEC 10 output tensors) to FILE;\n"
     "                          its directory must exist and FILE must not be CASE\n"
     "  --check                 compare every step with the oracle; exit 1 on a mismatch\n"
     "  --max-memory MIB        memory the replay may use (default 1024 MiB + 16 x the\n"
     "                          case's tensor bytes); a case that needs more is refused\n"
     "  -h, --help              this help\n"},
    {"check", "[--quick | --tiny] [--filter A,B] [--portable]",
     "check every cuda operation and layer forward against the cpu reference",
     "On a GPU: every cuda operation and whole-layer forward against the cpu\n"
     "reference over a matrix of shapes, dtypes, MTP and paging cases, a decode\n"
     "step captured in a CUDA graph and replayed (also with padding requests), and\n"
     "the engine API cases (\"api: ...\": upper-bound lengths, padding requests,\n"
     "forward flags, write_kv from slots, the BLNHC cache, the workspace bound).\n"
     "Prints the GPU and the kernel set first; ends with \"N passed, N failed\".\n"
     "\n"
     "options:\n"
     "  (none)                  the full matrix (several minutes)\n"
     "  --quick                 a covering subset (under a minute)\n"
     "  --tiny                  the few small cases run under compute-sanitizer\n"
     "  --filter A,B            only cases whose name contains A or B (e.g. api,graph)\n"
     "  --portable              run the portable kernels (those of non-Hopper GPUs: the\n"
     "                          generic indexer) even on Hopper, to check that path\n"
     "  -h, --help              this help\n"},
    {"bench",
     "[--quick] [--filter A,B] [--json FILE] [--check-only] [--no-check] [--max-seconds N] "
     "[--tiles auto|always|never] [--max-score-mib N] [--crossover X] [--portable]",
     "check the cuda attention against cpu, then time SPEC 9 workloads",
     "On a GPU (figures are fractions of an H200): phase 1 checks the cuda attention against the "
     "cpu backend;\n"
     "phase 2 times whole decode/verify steps of four layers captured in a CUDA graph,\n"
     "then per shape the attention operation and the whole layer step (one forward\n"
     "call), on the SPEC 9 reference workloads: medians of L2-cold runs, as fractions\n"
     "of the H200's copy bandwidth and bf16 peak, with each row's byte floor and the\n"
     "host time of one forward call.\n"
     "\n"
     "options:\n"
     "  --quick                 fewer shapes, 5 runs each instead of 7, a 16 GB pool\n"
     "  --filter A,B            only shapes whose label contains A or B, e.g.\n"
     "                          \"csa bf16 decode ctx 128K b32\" or \"graph decode\"\n"
     "  --json FILE             also write the checks and timings to FILE as JSON\n"
     "  --check-only            stop after phase 1\n"
     "  --no-check              skip phase 1\n"
     "  --max-seconds N         skip the shapes left after N seconds, 1..86400\n"
     "  --tiles auto|always|never\n"
     "                          prefill rows in tiles (PlanOptions::tile_attention) as the\n"
     "                          backend chooses (default), on every layer, or never\n"
     "  --max-score-mib N       the layer rows' PlanOptions::max_score_bytes in MiB, 1..65536\n"
     "                          (default 256): CSA scores are computed in row chunks of at\n"
     "                          most this many bytes\n"
     "  --crossover X           CSA prefill tiles run as tiles while their union of selected\n"
     "                          regions is at most X x K per row (PlanOptions::\n"
     "                          tile_union_crossover; default: the backend's measured value)\n"
     "  --portable              time the portable kernels (those of non-Hopper GPUs: the\n"
     "                          mma.sync attention, the generic indexer) even on Hopper\n"
     "  -h, --help              this help\n"},
    {"soak",
     "[--device cpu|cuda|auto] [--context N] [--steps N] [--kv-dtype bf16|fp8] "
     "[--shapes spec|small] [--chunk N] [--check-every N] [--check-rows N] [--repeat-every N] "
     "[--short-requests N] [--seed N] [--max-seconds N] [--json FILE] [--inject-corruption]",
     "a long bounded run against a reference: caches bit for bit, outputs, determinism",
     "A soak run of a CSA and an SWA layer (MTP k = 3): one request grown to a long\n"
     "context by chunked prefill (cache writes through write_kv + update_summaries,\n"
     "the last chunk a whole forward), then decode and verify steps with random\n"
     "acceptance (rejected drafts rewritten at the same positions by the next step),\n"
     "mixed with short requests that come and go, reusing ring entries and freed\n"
     "blocks handed out again in shuffled order. The reference is, on cuda, the cpu\n"
     "backend repeating every step's cache writes on its own cache; on cpu, the dense\n"
     "oracle. Every step's DeviceStatus must be zero; sampled rows of sampled steps\n"
     "must match the reference (rel L2 and max error, NaN never passes); sampled\n"
     "decode/verify steps run twice must give the same output and selection bits;\n"
     "at the end every summary and K/V row of every live request must equal the\n"
     "reference's bit for bit. Prints a summary table; exit 1 on any mismatch.\n"
     "\n"
     "options:\n"
     "  --device cpu|cuda|auto  backend under test (default auto)\n"
     "  --context N             tokens of the long request before decoding, 16..2^30\n"
     "                          (default 1048576); use a few thousand on cpu\n"
     "  --steps N               decode/verify steps after the long prefill (default 2000)\n"
     "  --kv-dtype bf16|fp8     KV cache dtype of both layers (default bf16; fp8 = e4m3)\n"
     "  --shapes spec|small     SPEC 2 reference shapes (default) or the demo's reduced\n"
     "                          ones (16 heads, 2 KV heads, Di 64, top-k 16, window 128)\n"
     "  --chunk N               prefill tokens per step, 64..65536 (default 2048)\n"
     "  --check-every N         spot-check every Nth decode/verify step (default 100;\n"
     "                          the long prefill's last chunk is always checked)\n"
     "  --check-rows N          rows per checked step and layer, 1..64 (default 4; the\n"
     "                          long request's last row is always one)\n"
     "  --repeat-every N        run every Nth decode/verify step twice and compare bits\n"
     "                          (default 50; 0 = never)\n"
     "  --short-requests N      short requests live at once, 0..64 (default 6)\n"
     "  --seed N                workload seed (default 1)\n"
     "  --max-seconds N         stop stepping after N seconds, then compare and report\n"
     "                          what ran (marked partial); 0 = no bound (default)\n"
     "  --json FILE             also write the summary as JSON to FILE\n"
     "  --inject-corruption     flip one bit of a device summary after the long prefill;\n"
     "                          the run must then fail (tests the comparison)\n"
     "  -h, --help              this help\n"},
    {"version", "", "print the version, the backends built in and whether cuda can run here",
     "Prints the version, the backends this build has, and whether the cuda backend can\n"
     "run on this machine (and if not, what is missing).\n"
     "\n"
     "options:\n"
     "  -h, --help              this help\n"},
};

}  // namespace

const CommandHelp* find_help(const std::string& name) {
  for (const CommandHelp& h : kHelp) {
    if (name == h.name) return &h;
  }
  return nullptr;
}

void print_usage(std::ostream& out) {
  out << "usage: step5attn <command> [options]\n"
         "       step5attn <command> --help\n\ncommands:\n";
  for (const CommandHelp& h : kHelp) {
    out << "  step5attn " << h.name << (*h.synopsis ? " " : "") << h.synopsis << "\n      "
        << h.summary << "\n";
  }
  out << "\n" << kExitCodes;
}

void print_command_help(std::ostream& out, const CommandHelp& h) {
  out << "usage: step5attn " << h.name << (*h.synopsis ? " " : "") << h.synopsis << "\n\n"
      << h.details << "\n"
      << kExitCodes;
}

}  // namespace step5::tool
