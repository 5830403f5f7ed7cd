//! Who is asking: the user a request authenticated as (kube's `user.Info`), with every group it
//! belongs to.

/// An authenticated user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    /// User name (`alice`, `system:serviceaccount:cnat:cnat`).
    pub name: String,
    /// Groups, including the derived ones.
    pub groups: Vec<String>,
}
