//! batch/v1 CronJobs: what their strategy adds to the generic store, as kube-apiserver's
//! `pkg/registry/batch/cronjob/strategy.go` does.
//!
//! On create the status is cleared and `SetDefaults_CronJob` (`pkg/apis/batch/v1/defaults.go`;
//! the real server applies it whenever it decodes a CronJob) fills `concurrencyPolicy: Allow`,
//! `suspend: false`, `successfulJobsHistoryLimit: 3` and `failedJobsHistoryLimit: 1`.
//! `spec.schedule` is not validated at create (a schedule that does not parse is left alone by
//! the controller manager's CronJob controller, which computes due times with [`Schedule`]).
//!
//! The schedule grammar is `apimachinery::cron` ([`Schedule`], shared with the controller
//! manager).

use serde_json::{Value, json};

use crate::registry::resources::ResourceDef;
use crate::registry::strategy::{Strategy, clear_status};

/// The strategy of `cronjobs` (see the module docs).
#[derive(Debug, Default)]
pub struct CronJobStrategy;

impl Strategy for CronJobStrategy {
    fn prepare_for_create(&self, def: &ResourceDef, obj: &mut Value) {
        clear_status(def, obj);
        set_defaults(obj);
    }
}

/// `SetDefaults_CronJob` (see the module docs).
fn set_defaults(obj: &mut Value) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for (k, v) in [
        ("concurrencyPolicy", json!("Allow")),
        ("suspend", json!(false)),
        ("successfulJobsHistoryLimit", json!(3)),
        ("failedJobsHistoryLimit", json!(1)),
    ] {
        if spec.get(k).is_none_or(Value::is_null) {
            spec.insert(k.into(), v);
        }
    }
}
