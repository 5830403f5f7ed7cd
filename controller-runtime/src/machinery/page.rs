//! The `/machinery` page: one HTML file (inline SVG and script, no external asset), compiled
//! into the binary.

/// The page's text (`page.html` beside this file).
pub const PAGE: &str = include_str!("page.html");
