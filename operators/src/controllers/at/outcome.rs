//! How a finished pod ended.

use super::*;

/// How a finished pod ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Succeeded or Failed.
    pub result: AtResult,
    /// The container's exit code, when the kubelet reported one.
    pub exit_code: Option<i32>,
    /// A sentence for `status.message` and the event.
    pub message: String,
}

/// The outcome of a pod in phase `Succeeded` or `Failed`; `None` while it has not finished.
pub fn finished(pod: &Pod) -> Option<Outcome> {
    let status = pod.status.as_ref()?;
    let result = match status.phase.as_deref()? {
        "Succeeded" => AtResult::Succeeded,
        // The kubelet's verdict for a pod past its `activeDeadlineSeconds`.
        "Failed" if status.reason.as_deref() == Some(reason::DEADLINE_EXCEEDED) => {
            AtResult::DeadlineExceeded
        }
        "Failed" => AtResult::Failed,
        _ => return None,
    };
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let terminated = status
        .container_statuses
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|c| c.name == POD_CONTAINER_NAME)
        .or_else(|| status.container_statuses.as_deref().and_then(|c| c.first()))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref());
    let exit_code = match (terminated, result) {
        (Some(t), _) => Some(t.exit_code),
        (None, AtResult::Succeeded) => Some(0),
        (None, AtResult::Failed | AtResult::DeadlineExceeded) => None,
    };
    let detail = terminated
        .and_then(|t| t.reason.clone().or_else(|| t.message.clone()))
        .or_else(|| status.reason.clone())
        .or_else(|| status.message.clone());
    let message = match (result, exit_code) {
        (AtResult::Succeeded, _) => format!("pod {pod_name} succeeded: the command exited with 0"),
        (AtResult::Failed, Some(code)) => match detail {
            Some(d) => format!("pod {pod_name} failed: the command exited with {code} ({d})"),
            None => format!("pod {pod_name} failed: the command exited with {code}"),
        },
        (AtResult::Failed, None) => match detail {
            Some(d) => format!("pod {pod_name} failed: {d}"),
            None => format!("pod {pod_name} failed"),
        },
        (AtResult::DeadlineExceeded, _) => format!(
            "pod {pod_name} was stopped at its activeDeadlineSeconds: {}",
            status
                .message
                .as_deref()
                .unwrap_or("Pod was active on the node longer than the specified deadline")
        ),
    };
    Some(Outcome {
        result,
        exit_code,
        message,
    })
}
