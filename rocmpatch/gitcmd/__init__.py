"""The only package that runs git.

It runs git as a subprocess (core.py starts every one) and works on git objects (blobs, trees,
commits), so a patch can be applied, checked or compared without touching a working tree.
Failures become RocmpatchError subclasses with one clear line.

Callers use `from rocmpatch import gitcmd` (or `from rocmpatch.gitcmd import X`); the modules:
core (Repo, running git, errors), transport (URLs, fetching, copying objects), objects (blobs, trees), commits,
working_tree (status, moving between trees), history_walk (drift) and merge (rebase).
"""

# core first: it sets up the environment every git process gets.
from rocmpatch.gitcmd.core import (
    NotARepository,
    Repo,
    init_repo,
    open_repo,
    require_git,
    require_commit,
    resolve_commit,
    run,
    run_bytes,
    scrubbed_environment,
    tree_of,
    trust,
)
from rocmpatch.gitcmd.commits import (
    Identity,
    MailInfo,
    commit_date,
    commit_links,
    commit_tree,
    format_patch,
    mail_info,
)
from rocmpatch.gitcmd.history_walk import (
    CommitInfo,
    PathChange,
    Rename,
    commit_info,
    first_parent_line,
    is_ancestor,
    merge_base,
    path_history,
    renames_between,
)
from rocmpatch.gitcmd.merge import (
    MergeResult,
    add_worktree,
    init_borrowing_repo,
    merge_commits,
    objects_dir,
    unmerged_paths,
)
from rocmpatch.gitcmd.objects import (
    GITLINK_MODE,
    REGULAR_MODE,
    SYMLINK_MODE,
    Entry,
    TreeReader,
    blob_id,
    export_tree,
    has_object,
    list_tree,
    object_id,
    objects_not_matching_ids,
    paths_at,
    read_blob,
    write_blob,
    write_tree,
)
from rocmpatch.gitcmd.transport import CommitNotOnRemote, check_url, copy_objects, fetch_commit, fetch_ref, local_path_of
from rocmpatch.gitcmd.working_tree import (
    changed_paths,
    diff_trees,
    dirty_paths,
    force_tree,
    git_dir,
    hash_files,
    head_commit,
    hidden_edits,
    ignored_paths,
    move_tree,
    refresh_index,
    update_ref,
    update_ref_holding,
    worktree_entries,
    worktree_tree,
)

__all__ = [
    "GITLINK_MODE", "REGULAR_MODE", "SYMLINK_MODE",
    "CommitInfo", "Entry", "Identity", "MailInfo", "MergeResult", "NotARepository", "PathChange", "Rename", "Repo", "TreeReader",
    "add_worktree", "blob_id", "changed_paths", "check_url", "commit_date", "commit_info", "commit_links",
    "commit_tree", "copy_objects", "diff_trees", "dirty_paths", "export_tree", "fetch_commit", "fetch_ref", "first_parent_line",
    "force_tree", "format_patch", "git_dir", "has_object", "hash_files", "head_commit", "hidden_edits", "ignored_paths", "init_borrowing_repo",
    "init_repo", "is_ancestor", "list_tree", "local_path_of", "mail_info", "merge_base", "merge_commits", "move_tree", "refresh_index", "object_id", "objects_not_matching_ids",
    "objects_dir", "open_repo", "path_history", "paths_at", "read_blob", "renames_between", "require_git", "unmerged_paths",
    "require_commit",
    "resolve_commit", "run", "run_bytes", "scrubbed_environment", "tree_of", "trust", "update_ref", "update_ref_holding", "worktree_entries", "worktree_tree",
    "write_blob", "write_tree",
]
