from recruiter.cli import main

main(prog_name="recruiter")
