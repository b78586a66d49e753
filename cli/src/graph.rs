//! The dependency graph of a plan as a terminal tree or as Graphviz dot.
//!
//! Tree: roots are tasks without dependencies (among the listed tasks), and the
//! children of a task are its dependents, in list order. A task reached a
//! second time (it has several dependencies) is printed once more as a
//! reference marked `(see above)` without its subtree.
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use todod_proto::Task;

use crate::render::{marker, one_line};

struct Graph<'a> {
    order: Vec<&'a Task>,
    dependents: HashMap<&'a str, Vec<&'a Task>>,
}

impl<'a> Graph<'a> {
    fn new(tasks: &'a [Task]) -> Self {
        let mut sorted: Vec<&Task> = tasks.iter().collect();
        sorted.sort_by_key(|t| t.position);
        let known: HashSet<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
        let mut dependents: HashMap<&str, Vec<&Task>> = HashMap::new();
        for t in &sorted {
            for dep in &t.depends_on {
                if known.contains(dep.as_str()) {
                    dependents.entry(dep.as_str()).or_default().push(t);
                }
            }
        }
        Graph {
            order: sorted,
            dependents,
        }
    }
}

fn label(t: &Task) -> String {
    let mut s = format!("{} {} {}", marker(&t.status), t.id, one_line(&t.content));
    if !t.kind.is_empty() && t.kind != "todo" {
        let _ = write!(s, " [{}]", t.kind);
    }
    if t.archived {
        s.push_str(" (archived)");
    }
    s
}

/// The plan as a tree of dependencies, one task per line.
pub fn tree(tasks: &[Task]) -> String {
    if tasks.is_empty() {
        return "no tasks\n".to_string();
    }
    let g = Graph::new(tasks);
    let known: HashSet<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut out = String::new();
    let roots = g
        .order
        .iter()
        .filter(|t| !t.depends_on.iter().any(|d| known.contains(d.as_str())));
    for root in roots {
        walk(&g, root, "", None, &mut seen, &mut out);
    }
    // Only reachable through a cycle, which the daemon refuses; shown anyway.
    for t in &g.order {
        if !seen.contains(t.id.as_str()) {
            walk(&g, t, "", None, &mut seen, &mut out);
        }
    }
    out
}

/// `last`: None for a root, Some(is_last_sibling) for a child.
fn walk<'a>(
    g: &Graph<'a>,
    t: &'a Task,
    prefix: &str,
    last: Option<bool>,
    seen: &mut HashSet<&'a str>,
    out: &mut String,
) {
    let (branch, child_prefix) = match last {
        None => ("", String::new()),
        Some(true) => ("`-- ", format!("{prefix}    ")),
        Some(false) => ("|-- ", format!("{prefix}|   ")),
    };
    if !seen.insert(t.id.as_str()) {
        let _ = writeln!(out, "{prefix}{branch}{} (see above)", label(t));
        return;
    }
    let _ = writeln!(out, "{prefix}{branch}{}", label(t));
    let children = g
        .dependents
        .get(t.id.as_str())
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for (i, child) in children.iter().enumerate() {
        walk(
            g,
            child,
            &child_prefix,
            Some(i + 1 == children.len()),
            seen,
            out,
        );
    }
}

/// Fill colour per status.
fn colour(t: &Task) -> &'static str {
    match (t.status.as_str(), t.readiness.as_str()) {
        ("completed", _) => "palegreen",
        ("in_progress", _) => "lightskyblue",
        ("failed", _) => "salmon",
        ("cancelled", _) => "lightgrey",
        ("pending", "ready") => "white",
        ("pending", "blocked_by_failure") => "orange",
        ("pending", _) => "lightyellow",
        _ => "white",
    }
}

/// A double-quoted dot string.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Graphviz: one node per task coloured by status, edges dependency -> dependent.
pub fn dot(plan: &str, tasks: &[Task]) -> String {
    let g = Graph::new(tasks);
    let known: HashSet<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", quote(plan));
    out.push_str("  rankdir=LR;\n");
    out.push_str("  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\"];\n");
    for t in &g.order {
        let text: String = one_line(&t.content).chars().take(60).collect();
        let style = if t.status == "cancelled" || t.archived {
            ", style=\"rounded,filled,dashed\""
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {} [label={}, fillcolor={}, tooltip={}{style}];",
            quote(&t.id),
            quote(&format!("{}\n{}", t.id, text)),
            colour(t),
            quote(&t.status),
        );
    }
    let mut missing: Vec<&str> = Vec::new();
    for t in &g.order {
        for dep in &t.depends_on {
            if !known.contains(dep.as_str()) && !missing.contains(&dep.as_str()) {
                missing.push(dep);
            }
        }
    }
    for id in missing {
        let _ = writeln!(
            out,
            "  {} [label={}, style=dashed];",
            quote(id),
            quote(&format!("{id}\n(not listed)"))
        );
    }
    for t in &g.order {
        for dep in &t.depends_on {
            let _ = writeln!(out, "  {} -> {};", quote(dep), quote(&t.id));
        }
    }
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, pos: i64, status: &str, deps: &[&str]) -> Task {
        Task {
            id: id.into(),
            content: format!("do {id}"),
            status: status.into(),
            position: pos,
            kind: "todo".into(),
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn tree_shows_shared_subtrees_once() {
        let tasks = vec![
            task("t1", 1, "completed", &[]),
            task("t2", 2, "in_progress", &["t1"]),
            task("t3", 3, "pending", &["t1"]),
            task("t4", 4, "pending", &["t2", "t3"]),
            task("t5", 5, "pending", &["t4"]),
            task("t6", 6, "failed", &[]),
            task("t7", 7, "cancelled", &[]),
        ];
        let expected = "\
[x] t1 do t1
|-- [~] t2 do t2
|   `-- [ ] t4 do t4
|       `-- [ ] t5 do t5
`-- [ ] t3 do t3
    `-- [ ] t4 do t4 (see above)
[!] t6 do t6
[-] t7 do t7
";
        assert_eq!(tree(&tasks), expected);
    }

    #[test]
    fn tree_follows_list_order_and_survives_odd_input() {
        // Listed out of position order, a dependency that is not listed, and a cycle.
        let tasks = vec![
            task("t9", 2, "pending", &["t8"]),
            task("t8", 1, "pending", &["t9"]),
            task("t3", 0, "pending", &["t-archived"]),
        ];
        let expected = "\
[ ] t3 do t3
[ ] t8 do t8
`-- [ ] t9 do t9
    `-- [ ] t8 do t8 (see above)
";
        assert_eq!(tree(&tasks), expected);
        assert_eq!(tree(&[]), "no tasks\n");
    }

    #[test]
    fn dot_has_edges_from_dependency_to_dependent() {
        let mut t2 = task("t2", 2, "pending", &["t1", "t0"]);
        t2.readiness = "blocked".into();
        t2.content = "say \"hi\"\\now".into();
        let out = dot("my plan", &[task("t1", 1, "completed", &[]), t2]);
        let expected = r#"digraph "my plan" {
  rankdir=LR;
  node [shape=box, style="rounded,filled", fontname="Helvetica"];
  "t1" [label="t1\ndo t1", fillcolor=palegreen, tooltip="completed"];
  "t2" [label="t2\nsay \"hi\"\\now", fillcolor=lightyellow, tooltip="pending"];
  "t0" [label="t0\n(not listed)", style=dashed];
  "t1" -> "t2";
  "t0" -> "t2";
}
"#;
        assert_eq!(out, expected);
    }
}
