"""Model roles behind small protocols (design.md §2): ``vlm`` (image + text -> text) and its implementations."""
