//! The docs' drift guard (`cargo test --test docs`, no cluster needed).
//!
//! The chapters in `docs/` quote our code and our logs. Code moves on; a
//! quote that no longer matches teaches something false. Two checks:
//!
//! 1. **Code excerpts.** Every ```` ```rust ```` block in `docs/*.md` must be
//!    preceded by a marker naming the file it quotes:
//!
//!    ```text
//!    <!-- excerpt: src/tfjob/controller/reconciler.rs -->
//!    ```
//!
//!    and its lines must appear in that file verbatim and consecutively,
//!    modulo leading indentation. A line `// ...` marks an elision: the parts
//!    before and after it must each appear, in that order.
//! 2. **Log lines.** Every log line shown in a plain code block whose target
//!    is ours (`pipeline`, or `tfjob_operator::…`) must have its message as a
//!    string literal in the module the target names (for `pipeline`: any
//!    `target: "pipeline"` call), with exactly the fields that call records,
//!    in its order, and a pipeline line's `stage="N name"` is the one that
//!    call spells. Timestamps and values differ run to run; messages, field
//!    names and stages must not.
//!
//! A failure names the doc, the line and the source file. This is what makes
//! "every sentence true" checkable for the parts of a chapter that are code.
//!
//! It also guards the house's shape (CONTRIBUTING):
//!
//! 3. **Length.** No `.rs` file we write passes 1,000 lines, and one over 700
//!    lines of code says why in a `//! **Length:**` paragraph. Generated
//!    files are exempt by name (`shape::GENERATED`), and each must say so.
//! 4. **Imports go downward.** No `pub use` anywhere in `src/`, so every
//!    import names the module that defines the item; and the top-level
//!    modules import only downward (`runtime` never names
//!    `crate::observability`, `crate::api`, `crate::tfjob` or `crate::cli`;
//!    `observability` names of the runtime only the metrics seam it
//!    implements, `crate::runtime::metrics`; ...). Line-based: a child reaching a parent's private
//!    `use` through `super::` is not caught.
//!
//! And that the pages lead where they say (README, CONTRIBUTING, `docs/`,
//! the chart's, harness's and examples' READMEs):
//!
//! 5. **Links** ([`links`]): every relative link, reference, image and
//!    Mermaid `click` names a file that exists, and every anchor a heading
//!    of its page.
//! 6. **Names** ([`names`]): `cargo test` filters select a test, `make`
//!    targets exist, `--flags` are ours or another tool's on a short list,
//!    and every flag of `run` has a row in `docs/operating.md`'s flag table
//!    with the code's default.
//!
//! And that the tutorial and its pictures agree with what they describe:
//!
//! 7. **Chapters** ([`chapters`]): numbered in reading order without gaps;
//!    every link that names a chapter's number (navigation lines, the
//!    index, "chapter 8", chapter 0's stage table) leads to that chapter.
//! 8. **Pictures** ([`pictures`]): `docs/trace-ui.png` shows today's trace
//!    UI page (a fingerprint in the PNG), and the dashboard's pictures are
//!    newer than the dashboard they draw.
//!
//! And the published benchmark figures (issue #29):
//!
//! 9. **Results tables** ([`results`], tables in [`results_tables`] and,
//!    for the fault suite, [`results_faults`]): a
//!    table between `<!-- results: … -->` markers must be what its committed
//!    results file in `benches/results/` renders (`make bench`'s tables in
//!    [`results_machinery`]), every results file says its
//!    commit, command, machine and date, and in the benchmark docs every
//!    other table is marked `<!-- unbacked: why -->`, visibly, or holds no
//!    figures; the decimals in the prose of the docs listed in
//!    [`results_prose::DOCS`] (`docs/reliability.md`, `benchmarks.md`,
//!    `scale.md`) are values of the files their tables come from, and a
//!    measured decimal ("19.2 s") in a numbered chapter's prose is a value
//!    of a results file the chapter links to.
//! 10. **Kubeflow's texts** ([`compat`]): the compatibility doc lists every
//!     message of `tfjob::kubeflow::messages::KUBEFLOW` and names each deliberate
//!     difference.
//! 11. **History pointers** ([`history`]): every `` `git show <commit>:<path>` ``
//!     in the Markdown we write names a commit of the history holding that
//!     file, and the sections quoted after it are headings there (where a
//!     page retired figures it can no longer back, the reader still finds them).
//!
//! One module per kind of check; [`repo`] and [`markdown`] are what they
//! share.
mod chapters;
mod compat;
mod excerpts;
mod history;
mod links;
mod markdown;
mod names;
mod pictures;
mod repo;
mod results;
mod results_faults;
mod results_first_hour;
mod results_machinery;
mod results_numbers;
mod results_profile;
mod results_prose;
mod results_tables;
mod shape;
