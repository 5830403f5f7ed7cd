//! The `networking.k8s.io` group's resources, as kube-apiserver's
//! `pkg/registry/networking/<resource>/` packages: one file per resource holding its
//! [`Strategy`](crate::registry::strategy::Strategy).
//!
//! | resource | scope | what its strategy adds |
//! |---|---|---|
//! | [`ingresses`] | namespaced, `/status` | `ValidateIngressCreate`/`Update`: a default backend or rules, `pathType`, paths, service backends, TLS hosts; `/status` checks the load balancer addresses |
//! | [`ingressclasses`] | cluster | `parameters.scope` defaulted to `Cluster`; a domain-prefixed `controller`, immutable; the parameters reference |
//! | [`networkpolicies`] | namespaced | `policyTypes` defaulted from the rules, ports' `protocol` to `TCP`; selectors, ports, peers and IP blocks validated |
//!
//! Every one of them keeps `metadata.generation` (1 on create, +1 on a spec change), as their
//! kube strategies do. Nothing in this server acts on them: there is no ingress controller and
//! no network plugin, so an Ingress's `status.loadBalancer` stays empty until a client writes
//! it through `/status`, and a NetworkPolicy filters no traffic (the simulated node has no
//! network of its own), exactly as on a cluster without such controllers.

pub mod ingressclasses;
pub mod ingresses;
pub mod networkpolicies;
