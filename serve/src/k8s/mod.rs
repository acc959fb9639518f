//! The Kubernetes scheduler extender: kube-scheduler's `filter`, `prioritize` and `preempt`
//! webhooks (`k8s.io/kube-scheduler/extender/v1`, exact upstream JSON) answered by the
//! service's own decision path, on the HTTP listener (`docs/kubernetes.md`).
//!
//! `types` holds the wire types, `quantity` Kubernetes quantities, `translate` the mapping of
//! Pods and Nodes to snapshot jobs and nodes, `extender` the verbs, `routes` the HTTP face.
//! Depends on the engine, the world and `Score`; nothing else in the crate depends on it but
//! the HTTP router.

pub mod extender;
pub mod quantity;
pub mod routes;
pub mod translate;
pub mod types;

pub use extender::Extender;
pub use routes::routes;
