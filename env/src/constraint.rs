//! Node labels and the placement constraints jobs put on them: which nodes a job's tasks may
//! use (Kubernetes `nodeSelector` and required node affinity, Slurm `--constraint` features),
//! and whether a gang's tasks must land on distinct nodes.
//!
//! Owns the label expression language and its evaluation; knows nothing of capacity.
//! Feasibility (`crate::cluster`) turns a job's constraints into the set of nodes it may use.
//!
//! Text form, shared by the normalized trace's `constraints` column, the cluster file's
//! `labels` and the Slurm bridge (whose `--constraint` syntax it extends): alternatives
//! separated by `|`, each a conjunction of terms separated by `&` (`&` binds tighter, as in
//! Slurm). A term is `key` (the label exists; a Slurm feature), `!key` (it does not),
//! `key=v1,v2` (its value is one of these) or `key!=v1,v2` (it is absent or none of these).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// A node's labels: key -> value. A Slurm feature `ib` is the label `ib` with an empty value.
pub type NodeLabels = BTreeMap<String, String>;

/// One requirement on one label (Kubernetes' `NodeSelectorRequirement` operators).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum LabelTerm {
    /// The label is present with one of `values`.
    In {
        key: String,
        values: Vec<String>,
    },
    /// The label is absent, or present with none of `values`.
    NotIn {
        key: String,
        values: Vec<String>,
    },
    Exists {
        key: String,
    },
    DoesNotExist {
        key: String,
    },
}

impl LabelTerm {
    pub fn matches(&self, labels: &NodeLabels) -> bool {
        match self {
            LabelTerm::In { key, values } => labels.get(key).is_some_and(|v| values.contains(v)),
            LabelTerm::NotIn { key, values } => labels.get(key).is_none_or(|v| !values.contains(v)),
            LabelTerm::Exists { key } => labels.contains_key(key),
            LabelTerm::DoesNotExist { key } => !labels.contains_key(key),
        }
    }
}

impl fmt::Display for LabelTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LabelTerm::In { key, values } => write!(f, "{key}={}", values.join(",")),
            LabelTerm::NotIn { key, values } => write!(f, "{key}!={}", values.join(",")),
            LabelTerm::Exists { key } => write!(f, "{key}"),
            LabelTerm::DoesNotExist { key } => write!(f, "!{key}"),
        }
    }
}

/// Where a job's tasks may go. The default (no terms, not distinct) constrains nothing, and
/// a job carrying it is placed exactly as before constraints existed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Constraints {
    /// A node qualifies when it meets every term of at least one alternative (Kubernetes'
    /// ORed `nodeSelectorTerms` of ANDed requirements). Empty: every node qualifies.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub any_of: Vec<Vec<LabelTerm>>,
    /// The gang's tasks must each be on a different node (Slurm's `--nodes=N` with one task
    /// per node; a pod anti-affinity on the gang's own label).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub distinct_nodes: bool,
}

impl Constraints {
    /// True when the job is free to go anywhere, several tasks on a node included.
    pub fn is_none(&self) -> bool {
        self.any_of.is_empty() && !self.distinct_nodes
    }
    /// True when label terms restrict the nodes (whatever `distinct_nodes` says).
    pub fn restricts_nodes(&self) -> bool {
        !self.any_of.is_empty()
    }
    /// Whether a node with `labels` qualifies.
    pub fn admits(&self, labels: &NodeLabels) -> bool {
        self.any_of.is_empty()
            || self
                .any_of
                .iter()
                .any(|all| all.iter().all(|t| t.matches(labels)))
    }
    /// Adds `terms` to every alternative (a `nodeSelector` beside required affinity: both must
    /// hold), or makes them the only alternative when there is none.
    pub fn and_all(&mut self, terms: &[LabelTerm]) {
        if terms.is_empty() {
            return;
        }
        if self.any_of.is_empty() {
            self.any_of.push(terms.to_vec());
        } else {
            for alt in &mut self.any_of {
                alt.extend_from_slice(terms);
            }
        }
    }
    /// Parses the text form (module docs). Empty text constrains nothing; `distinct_nodes`
    /// is not part of the text.
    pub fn parse(text: &str) -> Result<Constraints, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Constraints::default());
        }
        let any_of = text
            .split('|')
            .map(|alt| alt.split('&').map(parse_term).collect())
            .collect::<Result<Vec<Vec<LabelTerm>>, String>>()?;
        Ok(Constraints {
            any_of,
            distinct_nodes: false,
        })
    }
    /// The label keys the terms name.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.any_of.iter().flatten().map(|t| match t {
            LabelTerm::In { key, .. }
            | LabelTerm::NotIn { key, .. }
            | LabelTerm::Exists { key }
            | LabelTerm::DoesNotExist { key } => key.as_str(),
        })
    }
    /// The text form of the label terms (`parse` reads it back).
    pub fn label_text(&self) -> String {
        self.any_of
            .iter()
            .map(|all| {
                all.iter()
                    .map(LabelTerm::to_string)
                    .collect::<Vec<_>>()
                    .join("&")
            })
            .collect::<Vec<_>>()
            .join("|")
    }
}

/// Whether `k` is a label key this module accepts: non-empty, letters, digits and `-_./`
/// (Kubernetes' label keys and Slurm's feature names both are).
pub fn is_label_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn parse_term(text: &str) -> Result<LabelTerm, String> {
    let t = text.trim();
    let key_ok = is_label_key;
    let values = |v: &str| -> Result<Vec<String>, String> {
        let vs: Vec<String> = v.split(',').map(|s| s.trim().to_string()).collect();
        if vs
            .iter()
            .any(|s| s.contains(['(', ')', '[', ']', '*', '=', '!']))
        {
            return Err(format!("bad value list {v:?} in term {t:?}"));
        }
        Ok(vs)
    };
    let term = if let Some((k, v)) = t.split_once("!=") {
        LabelTerm::NotIn {
            key: k.trim().to_string(),
            values: values(v)?,
        }
    } else if let Some((k, v)) = t.split_once('=') {
        LabelTerm::In {
            key: k.trim().to_string(),
            values: values(v)?,
        }
    } else if let Some(k) = t.strip_prefix('!') {
        LabelTerm::DoesNotExist {
            key: k.trim().to_string(),
        }
    } else {
        LabelTerm::Exists { key: t.to_string() }
    };
    let key = match &term {
        LabelTerm::In { key, .. }
        | LabelTerm::NotIn { key, .. }
        | LabelTerm::Exists { key }
        | LabelTerm::DoesNotExist { key } => key,
    };
    if !key_ok(key) {
        return Err(format!(
            "term {t:?}: a label key is letters, digits and -_./ (brackets, counts and \
             parentheses are not supported)"
        ));
    }
    Ok(term)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> NodeLabels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Table test: each expression against a node labelled `ib`, `zone=a`, `gpu=a100`.
    #[test]
    fn expressions_match_as_documented() {
        let node = labels(&[("ib", ""), ("zone", "a"), ("gpu", "a100")]);
        for (text, want) in [
            ("", true),
            ("ib", true),
            ("nvlink", false),
            ("ib&nvlink", false),
            ("nvlink|ib", true),        // OR: one alternative holds
            ("nvlink&ib|zone=a", true), // & binds tighter: (nvlink & ib) | zone=a
            ("zone=b,c", false),        // In: a is not among b, c
            ("zone=a,b", true),
            ("zone!=a", false), // NotIn
            ("rack!=r1", true), // NotIn holds when the label is absent
            ("!nvlink", true),  // DoesNotExist
            ("!ib", false),
            ("gpu=a100&!nvlink&zone", true),
        ] {
            let c = Constraints::parse(text).expect(text);
            assert_eq!(c.admits(&node), want, "{text}");
            assert_eq!(
                Constraints::parse(&c.label_text()).expect(text),
                c,
                "{text}"
            );
        }
    }

    #[test]
    fn unsupported_syntax_is_refused() {
        for bad in ["[ib|nvlink]", "ib*2", "(a&b)", "&ib", "zone=(a)"] {
            assert!(Constraints::parse(bad).is_err(), "{bad}");
        }
        assert!(Constraints::default().is_none());
    }

    #[test]
    fn and_all_adds_to_every_alternative() {
        let mut c = Constraints::parse("a|b").unwrap();
        c.and_all(&[LabelTerm::Exists { key: "z".into() }]);
        assert_eq!(c.label_text(), "a&z|b&z");
        let mut d = Constraints::default();
        d.and_all(&[LabelTerm::Exists { key: "z".into() }]);
        assert_eq!(d.label_text(), "z");
    }
}
