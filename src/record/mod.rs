//! (This module's documentation and code arrive with its implementation.)
