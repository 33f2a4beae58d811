//! The permission gate, as one pure decision: given the session's modes, whether a plan
//! exists, the session's roots and what the user already allowed, what must happen before a
//! tool runs. No I/O here: the turn asks the questions [`decide`] lists, in order, and runs the
//! tool only if every answer allows it (`calls.rs`).

use crate::host_api::wire::{BoundaryPath, CollaborationMode, PermissionMode, Review};
use std::path::{Path, PathBuf};

/// What the gate knows about one tool call and its session.
pub struct Facts<'a> {
    pub mode: PermissionMode,
    pub collaboration: CollaborationMode,
    /// The tool's review kind; `None` for tools that only read.
    pub review: Option<Review>,
    /// A plan was proposed in this session (plan mode approves the latest one).
    pub has_plan: bool,
    /// Paths the tool will touch, with their access (`read`, `write`).
    pub touches: &'a [(PathBuf, &'static str)],
    /// The session's folders.
    pub roots: &'a [PathBuf],
    /// Paths outside the roots the user allowed during this turn.
    pub approved: &'a [String],
    /// The user allowed this review kind for the rest of the turn, or a kept rule allows
    /// this call.
    pub remembered: bool,
    /// A kept "always reject" rule covers this call: its description.
    pub rejected: Option<String>,
    /// What the action would read could not be checked against the session's folders (a
    /// command too large to check): it is asked as a whole, in every mode, as a path outside
    /// would be.
    pub unchecked: bool,
}

/// One question the user must answer "allow" to.
#[derive(Clone, Debug, PartialEq)]
pub enum Check {
    /// Plan mode: approve the latest plan (approval switches the session to `agent`).
    ApprovePlan,
    /// Access outside the session's folders.
    Boundary(Vec<BoundaryPath>),
    /// Ask mode: this kind of action.
    Permission(Review),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// Refused without asking; the reason is for the model.
    Refuse(String),
    /// Ask these, in order; run when all are allowed.
    Ask(Vec<Check>),
}

pub fn decide(tool: &str, f: &Facts) -> Gate {
    if f.mode == PermissionMode::Explore && f.review.is_some() {
        return Gate::Refuse(format!(
            "Refused: the session is in explore (read-only) mode, so {tool} is not allowed. Ask the user to switch modes."
        ));
    }
    if let (Some(_), Some(rule)) = (f.review, &f.rejected) {
        return Gate::Refuse(format!(
            "Refused: the user always rejects {rule} in this workspace. Do not retry it; the user can lift the rule with /permissions."
        ));
    }
    let mut checks = vec![];
    if f.review.is_some() && f.collaboration == CollaborationMode::Plan {
        if !f.has_plan {
            return Gate::Refuse(format!(
                "Refused: plan mode is on, so {tool} must wait. First propose a plan with update_plan; the user approves it before anything is written or run."
            ));
        }
        checks.push(Check::ApprovePlan);
    }
    // Paths outside the session's roots need an explicit approval, in every mode.
    let outside: Vec<BoundaryPath> = f
        .touches
        .iter()
        .filter(|(p, _)| !inside(p, f.roots) && !f.approved.iter().any(|a| p.starts_with(a)))
        .map(|(p, access)| BoundaryPath {
            path: p.display().to_string(),
            access: (*access).into(),
        })
        .collect();
    if !outside.is_empty() {
        checks.push(Check::Boundary(outside));
    }
    if let Some(review) = f.review {
        if f.unchecked || (f.mode == PermissionMode::Ask && !f.remembered) {
            checks.push(Check::Permission(review));
        }
    }
    Gate::Ask(checks)
}

fn inside(p: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| p.starts_with(r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use CollaborationMode::{Agent, Plan};
    use PermissionMode::{Ask, Bypass, Explore};

    #[test]
    fn the_gate_table() {
        let roots = [PathBuf::from("/w")];
        let inside = [(PathBuf::from("/w/a.rs"), "write")];
        let outside = [(PathBuf::from("/etc/hosts"), "read")];
        let approved = ["/etc".to_string()];
        let boundary = || {
            Check::Boundary(vec![BoundaryPath {
                path: "/etc/hosts".into(),
                access: "read".into(),
            }])
        };
        let refused = |g: &Gate, words: &str| matches!(g, Gate::Refuse(m) if m.contains(words));
        // (mode, collaboration, review, has_plan, touches, approved, remembered) → gate
        type Row<'a> = (
            PermissionMode,
            CollaborationMode,
            Option<Review>,
            bool,
            &'a [(PathBuf, &'static str)],
            &'a [String],
            bool,
        );
        let gate = |(mode, collaboration, review, has_plan, touches, approved, remembered): Row| {
            decide(
                "edit_file",
                &Facts {
                    mode,
                    collaboration,
                    review,
                    has_plan,
                    touches,
                    roots: &roots,
                    approved,
                    remembered,
                    rejected: None,
                    unchecked: false,
                },
            )
        };
        // Reads run in every mode, inside the roots.
        for mode in [Ask, Bypass, Explore] {
            let g = gate((mode, Agent, None, false, &inside, &[], false));
            assert_eq!(g, Gate::Ask(vec![]), "{mode:?}");
        }
        // Explore refuses anything with a review, even with a plan.
        assert!(refused(
            &gate((Explore, Plan, Some(Review::Edit), true, &inside, &[], false)),
            "explore"
        ));
        // Ask asks; a kind allowed for the turn is not asked again; bypass never asks.
        assert_eq!(
            gate((Ask, Agent, Some(Review::Edit), false, &inside, &[], false)),
            Gate::Ask(vec![Check::Permission(Review::Edit)])
        );
        assert_eq!(
            gate((Ask, Agent, Some(Review::Edit), false, &inside, &[], true)),
            Gate::Ask(vec![])
        );
        assert_eq!(
            gate((
                Bypass,
                Agent,
                Some(Review::Command),
                false,
                &inside,
                &[],
                false
            )),
            Gate::Ask(vec![])
        );
        // Plan mode: no plan → refused; a plan → approve it first, then the usual questions.
        assert!(refused(
            &gate((Bypass, Plan, Some(Review::Edit), false, &inside, &[], false)),
            "propose a plan"
        ));
        assert_eq!(
            gate((Ask, Plan, Some(Review::Edit), true, &inside, &[], false)),
            Gate::Ask(vec![Check::ApprovePlan, Check::Permission(Review::Edit)])
        );
        assert_eq!(
            gate((Ask, Plan, None, false, &inside, &[], false)),
            Gate::Ask(vec![]),
            "reads never wait for a plan"
        );
        // Outside the roots: asked in every mode that lets the tool run, unless approved.
        for mode in [Ask, Bypass, Explore] {
            assert_eq!(
                gate((mode, Agent, None, false, &outside, &[], false)),
                Gate::Ask(vec![boundary()]),
                "{mode:?}"
            );
            assert_eq!(
                gate((mode, Agent, None, false, &outside, &approved, false)),
                Gate::Ask(vec![])
            );
        }
        assert_eq!(
            gate((Ask, Plan, Some(Review::Edit), true, &outside, &[], false)),
            Gate::Ask(vec![
                Check::ApprovePlan,
                boundary(),
                Check::Permission(Review::Edit)
            ]),
            "the order: plan, boundary, permission"
        );
        // A `run_command` call with nothing to touch: its mode, whether it was remembered,
        // a kept rejection, and whether its reads could be checked.
        let command = |mode, remembered, rejected: Option<String>, unchecked| {
            decide(
                "run_command",
                &Facts {
                    mode,
                    collaboration: Agent,
                    review: Some(Review::Command),
                    has_plan: false,
                    touches: &[],
                    roots: &roots,
                    approved: &[],
                    remembered,
                    rejected,
                    unchecked,
                },
            )
        };
        // A command whose reads could not be checked is asked as a whole, whatever the mode
        // (calls.rs sets `unchecked` only where a rule let the command run unasked).
        for (mode, remembered) in [(Ask, true), (Bypass, false)] {
            let g = command(mode, remembered, None, true);
            assert_eq!(g, Gate::Ask(vec![Check::Permission(Review::Command)]));
        }
        // A kept rejection refuses before anything is asked, in every mode.
        for mode in [Ask, Bypass] {
            let g = command(
                mode,
                true,
                Some("commands starting with `rm`".into()),
                false,
            );
            assert!(
                refused(&g, "always rejects commands starting with `rm`"),
                "{g:?}"
            );
        }
    }
}
