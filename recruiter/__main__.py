from recruiter.cli.main import main

main(prog_name="recruiter")
