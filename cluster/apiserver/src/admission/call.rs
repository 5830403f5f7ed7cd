//! Calling one admission webhook: the `AdmissionReview` sent, the answer checked
//! (`VerifyAdmissionResponse`), and what a failure means (`ErrCallingWebhook` or
//! `ErrWebhookRejection`). The transport is the server's one webhook client,
//! [`crate::webhook::client::ClientManager`], which CRD conversion shares.

use std::time::Duration;

use serde_json::{Value, json};

use crate::admission::config::Webhook;
use crate::api::status::ApiError;
use crate::webhook::client::{ClientManager, PostError};

/// Why a call did not produce a verdict, or the verdict was "no".
#[derive(Clone, Debug)]
pub enum CallError {
    /// The webhook could not be called or answered nonsense (`ErrCallingWebhook`): the text
    /// after `failed calling webhook "NAME": `. `failurePolicy` decides.
    Calling {
        /// The webhook's name.
        webhook: String,
        /// Why.
        reason: String,
    },
    /// The webhook said no (`ErrWebhookRejection`), as the Status the client gets.
    Rejected(ApiError),
}

impl CallError {
    /// The error the client gets when this failure is not ignored: a rejection as is, a
    /// calling failure as `500 Internal error occurred: failed calling webhook ...`.
    pub fn into_api_error(self) -> ApiError {
        match self {
            CallError::Calling { webhook, reason } => {
                ApiError::internal(format!("failed calling webhook \"{webhook}\": {reason}"))
            }
            CallError::Rejected(e) => e,
        }
    }
}

/// A webhook's verdict.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// The decoded JSON patch (mutating webhooks), if any.
    pub patch: Option<Value>,
    /// `response.warnings`, for `Warning` headers.
    pub warnings: Vec<String>,
}

/// POSTs `review` to `hook` and checks the answer; `uid` is the request's.
pub async fn call(
    clients: &ClientManager,
    hook: &Webhook,
    review: &Value,
    uid: &str,
) -> Result<Verdict, CallError> {
    let calling = |reason: String| CallError::Calling {
        webhook: hook.name.clone(),
        reason,
    };
    let timeout = Duration::from_secs(hook.timeout_seconds);
    let answer = clients
        .post_json(&hook.endpoint, &hook.ca_bundle, timeout, review)
        .await
        .map_err(|e| match e {
            PostError::Client(e) => calling(e),
            PostError::Call(e) => calling(format!("failed to call webhook: {e}")),
        })?;
    let verdict = verify(hook, &answer, uid)
        .map_err(|e| calling(format!("received invalid webhook response: {e}")))?;
    verdict.map_err(CallError::Rejected)
}

/// `VerifyAdmissionResponse` and, for a denial, `ToStatusErr`.
/// `Ok(Err(..))` is a denial; `Err` an answer that is not a valid review.
fn verify(hook: &Webhook, answer: &Value, uid: &str) -> Result<Result<Verdict, ApiError>, String> {
    let Some(r) = answer.get("response").filter(|r| r.is_object()) else {
        return Err("webhook response was absent".into());
    };
    let got_uid = r["uid"].as_str().unwrap_or_default();
    if got_uid != uid {
        return Err(format!("expected response.uid={uid:?}, got {got_uid:?}"));
    }
    let want = format!("admission.k8s.io/{}", hook.review_version);
    let av = answer["apiVersion"].as_str().unwrap_or_default();
    let kind = answer["kind"].as_str().unwrap_or_default();
    if av != want || kind != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of {want}, Kind=AdmissionReview, got {av}, Kind={kind}"
        ));
    }
    let patch_type = r["patchType"].as_str().unwrap_or_default();
    let patch = r["patch"].as_str().unwrap_or_default();
    if !patch.is_empty() && patch_type.is_empty() {
        return Err("webhook returned response.patch but not response.patchType".into());
    }
    if !patch_type.is_empty() && hook.kind == crate::admission::config::Kind::Validating {
        return Err("validating webhook may not return response.patchType".into());
    }
    if !patch_type.is_empty() && patch_type != "JSONPatch" {
        return Err(format!(
            "webhook returned invalid response.patchType of {patch_type:?}"
        ));
    }
    let warnings = r["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if r["allowed"].as_bool() != Some(true) {
        return Ok(Err(to_status_err(&hook.name, &r["status"])));
    }
    let patch = if patch.is_empty() {
        None
    } else {
        use base64::Engine;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .map_err(|e| format!("the patch is not base64: {e}"))?;
        Some(serde_json::from_slice(&raw).map_err(|e| format!("the patch is not JSON: {e}"))?)
    };
    Ok(Ok(Verdict { patch, warnings }))
}

/// `webhookerrors.ToStatusErr`: the denial as the client sees it. The code is the webhook's
/// if it is at least 400, else 400; the message is `admission webhook "NAME" denied the
/// request: MSG` (the status message, else its reason, else `without explanation`); `reason`
/// and `details` (with field causes) are the webhook's.
pub fn to_status_err(name: &str, status: &Value) -> ApiError {
    let denied = format!("admission webhook {name:?} denied the request");
    let code = status["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    let message = status["message"].as_str().unwrap_or_default();
    let reason = status["reason"].as_str().unwrap_or_default();
    let message = if !message.is_empty() {
        format!("{denied}: {message}")
    } else if !reason.is_empty() {
        format!("{denied}: {reason}")
    } else {
        format!("{denied} without explanation")
    };
    let mut e = ApiError::new(code, reason, message);
    if let Some(d) = status.get("details").filter(|d| d.is_object()) {
        e.details = Some(d.clone());
    }
    e
}

/// The `AdmissionReview` request body.
pub fn review(version: &str, request: &Value) -> Value {
    json!({
        "apiVersion": format!("admission.k8s.io/{version}"),
        "kind": "AdmissionReview",
        "request": request,
    })
}
