"""Agent Skills interop for wbcore: import an Agent Skills folder (``SKILL.md``), a markdown file
or a folder as a toolkit (:mod:`~wbcore_agent_skills.skill_import`), audit what in it assumes
native execution (:mod:`~wbcore_agent_skills.native_audit`), export toolkits as Agent Skills
packages and a discovery index (:mod:`~wbcore_agent_skills.export`)."""
