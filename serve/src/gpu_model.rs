//! One spelling of GPU model names for everything that reports them to the service: the node
//! probe (NVML product names), the Kubernetes extender (node labels such as
//! `nvidia.com/gpu.product` and pods' node selectors on them) and anything else. Both sides of
//! a match must go through this function, or `NVIDIA-A100-SXM4-80GB` on a pod and
//! `NVIDIA A100-SXM4-80GB` from NVML would name different models.
//!
//! The rule: spaces and underscores become `-`; vendor and brand prefixes (`NVIDIA-`,
//! `Tesla-`, `GeForce-`, `Quadro-`) are dropped; the model is the product family, the first
//! word (`A100-SXM4-80GB` -> `A100`, `H100-80GB-HBM3` -> `H100`), or a product line and its
//! model (`RTX-A6000`), spelled as the simulator's GPU catalog spells it when it knows it
//! (`h100` -> `H100`). Memory size and form factor are left out: a job that asks for `A100`
//! runs on either, as the traces name models. Where jobs must tell variants apart, the node
//! reports its variant explicitly (`lachesis probe --gpu-model A100-80G`); in Kubernetes,
//! kube-scheduler's own node-selector filter, which runs before the extender, still tells
//! `NVIDIA-A100-SXM4-80GB` from `NVIDIA-A100-PCIE-40GB`.

use lachesis_env::gpu::GpuModel;

const PREFIXES: [&str; 4] = ["nvidia-", "tesla-", "geforce-", "quadro-"];
const LINES: [&str; 3] = ["RTX", "TITAN", "GTX"];

/// The service's name for a GPU model reported as `raw` (see the module docs).
pub fn normalise(raw: &str) -> String {
    let mut name = raw.trim().replace([' ', '_'], "-");
    while name.contains("--") {
        name = name.replace("--", "-");
    }
    loop {
        let lower = name.to_ascii_lowercase();
        let Some(rest) = PREFIXES
            .iter()
            .find_map(|p| lower.starts_with(p).then(|| name[p.len()..].to_string()))
        else {
            break;
        };
        if rest.is_empty() {
            break;
        }
        name = rest;
    }
    let words: Vec<&str> = name.split('-').filter(|w| !w.is_empty()).collect();
    let family = match words.as_slice() {
        [] => name.clone(),
        [line, model, ..] if LINES.iter().any(|l| l.eq_ignore_ascii_case(line)) => {
            format!("{line}-{model}")
        }
        [first, ..] => first.to_string(),
    };
    let known = |n: &str| GpuModel::catalog_names().find(|k| k.eq_ignore_ascii_case(n));
    // The family as the catalog spells it; a whole name only the catalog knows (an internal
    // code such as `GPU-series-1`); else the family as written.
    known(&family)
        .or_else(|| known(&name))
        .map_or(family, str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_nvml_names_agree() {
        for (raw, model) in [
            // The GPU feature discovery label and NVML's product name of one GPU.
            ("NVIDIA-A100-SXM4-80GB", "A100"),
            ("NVIDIA A100-SXM4-80GB", "A100"),
            ("NVIDIA-A100-PCIE-40GB", "A100"),
            ("NVIDIA A100-PCIE-40GB", "A100"),
            ("NVIDIA A100 80GB PCIe", "A100"),
            ("Tesla-V100-SXM2-16GB", "V100"),
            ("Tesla V100-SXM2-32GB", "V100"),
            ("NVIDIA-H100-80GB-HBM3", "H100"),
            ("NVIDIA H100 80GB HBM3", "H100"),
            ("NVIDIA H100 NVL", "H100"),
            ("NVIDIA-H200", "H200"),
            ("Tesla T4", "T4"),
            ("Tesla-T4", "T4"),
            ("NVIDIA A10", "A10"),
            ("NVIDIA-A10G", "A10G"),
            ("NVIDIA L40S", "L40S"),
            ("NVIDIA RTX A6000", "RTX-A6000"),
            ("NVIDIA GeForce RTX 4090", "RTX-4090"),
            ("NVIDIA GH200 480GB", "GH200"),
            ("h100", "H100"),
            ("a100-80g", "A100"),
            ("GPU-series-1", "GPU-series-1"),
            ("NVIDIA", "NVIDIA"),
        ] {
            assert_eq!(normalise(raw), model, "{raw}");
        }
    }
}
