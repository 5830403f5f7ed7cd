//! Tests of the `sample-controller` package itself: the demo, the docs, the flags, the Helm chart, the workspace.

mod demo_command;
mod deploy_pods;
mod docs_blocks;
mod flags_doc;
mod helm_chart;
mod workspace_modules;
