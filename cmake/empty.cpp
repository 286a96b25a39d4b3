// Placeholder translation unit for a component library that has no sources yet.
