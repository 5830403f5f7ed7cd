//! What a sync needs from an At's spec (the admission webhook checks the same).

use super::*;

/// Checks what a sync needs from the spec: a parsable schedule and a non-empty command.
/// Returns the due time, or a message naming the field and the value.
///
/// The command's field is named where the object wrote it (`spec.run.command`, or the book's
/// `spec.command`: [`AtSpec::command_field`]).
pub fn validate_spec(spec: &AtSpec) -> Result<Timestamp, String> {
    if spec.run.command.trim().is_empty() {
        return Err(format!(
            "{}: {:?} is empty; expected a shell command line such as \"echo YAY\"",
            spec.command_field(),
            spec.run.command
        ));
    }
    spec.parse_schedule()
}
