//! # Preflight: one clear line before anything starts
//!
//! `sample-controller run` checks, before it starts informers, that the server answers, that it
//! accepts the credentials, and that every selected operator's CustomResourceDefinition is
//! installed. Each failure is one [`ManagerError`] variant with the server's address and, for a
//! missing CRD, the command that installs it. Without this check the same problems surface as
//! a reflector retrying a 404 or a 401 forever, with readiness never passing.

use std::time::Duration;

use apimachinery::duration::format as format_duration;

use super::{Manager, ManagerError, Registration};
use sample_client_go::client;

/// How long the start-up check waits for the API server.
pub const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(15);

impl Manager {
    /// Checks, before anything starts, that the server answers, accepts our credentials and
    /// serves the custom resources the enabled controllers need
    /// ([`Registration::with_crd`]). One LIST with `limit=1` per custom resource: it needs only
    /// the `list` permission the controller has anyway.
    pub async fn preflight(&self) -> Result<(), ManagerError> {
        for registration in self.enabled() {
            self.preflight_crd(registration).await?;
        }
        Ok(())
    }

    /// One `LIST ?limit=1` of the controller's custom resource: a 404 means its CRD is not
    /// installed.
    async fn preflight_crd(&self, registration: &Registration) -> Result<(), ManagerError> {
        let Some((crd, list_one)) = &registration.crd else {
            return Ok(());
        };
        check_crd(
            crd,
            list_one(&self.client, self.config.namespace.as_deref()),
            &self.client,
        )
        .await
    }
}

async fn check_crd(
    crd: &str,
    list: futures_util::future::BoxFuture<'_, client::Result<()>>,
    client: &client::Client,
) -> Result<(), ManagerError> {
    let server = client.server().to_string();
    match tokio::time::timeout(PREFLIGHT_TIMEOUT, list).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if e.is_not_found() => Err(ManagerError::CrdMissing {
            crd: crd.to_string(),
            server,
        }),
        Ok(Err(e)) if e.is_unauthorized() || e.is_forbidden() => {
            Err(ManagerError::Unauthorized { server, source: e })
        }
        // The server answered, but with objects this release cannot read: naming the
        // connection would send the user looking in the wrong place.
        Ok(Err(e @ client::Error::Decode { .. })) => Err(ManagerError::Undecodable {
            crd: crd.to_string(),
            server,
            source: e,
        }),
        Ok(Err(e)) => Err(ManagerError::Unreachable { server, source: e }),
        Err(_) => Err(ManagerError::Unreachable {
            server,
            source: client::Error::Other(format!(
                "no answer within {}",
                format_duration(PREFLIGHT_TIMEOUT)
            )),
        }),
    }
}
