"""The store: what lands in the home — artifacts, the command registry, the run cache, the change
counter, installs, the home itself and what a killed process leaves behind."""
