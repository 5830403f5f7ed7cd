//! certificates.k8s.io/v1 CertificateSigningRequests: what their strategies add to the generic
//! store, after kube-apiserver's `pkg/registry/certificates/certificates/strategy.go`.
//!
//! A CSR has two subresources that write its status: `/status` (the signer's certificate) and
//! `/approval` (the approval conditions, `csrApprovalStrategy`). Here `/approval` is served as
//! `/status` is: an update through it takes the request's `.status` and keeps everything else
//! of the stored CSR. The real `csrApprovalStrategy` keeps all of the status but its
//! conditions, and the real validation (a parseable `spec.request`, the signer's name, one
//! `Approved` or `Denied` condition) is left out.

use serde_json::Value;

use crate::registry::strategy::{Strategy, take_status};

/// The subresource through which a CSR is approved or denied.
const APPROVAL: &str = "approval";

/// The strategy of `certificatesigningrequests` (see the module docs).
#[derive(Debug, Default)]
pub struct CertificateSigningRequestStrategy;

impl Strategy for CertificateSigningRequestStrategy {
    fn prepare_subresource_update(
        &self,
        subresource: &str,
        old: &Value,
        new: &Value,
    ) -> Option<Value> {
        (subresource == APPROVAL).then(|| take_status(old, new))
    }
}
